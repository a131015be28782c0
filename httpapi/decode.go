package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// apiError is an answer other than success, and the JSON body that says
// what was wrong and, when one field of the request was, which.
type apiError struct {
	Status  int    `json:"-"`
	Message string `json:"error"`
	Field   string `json:"field,omitempty"`
}

func (e *apiError) Error() string { return e.Message }

// badField is a 400 about one field of the request.
func badField(field, msg string) *apiError {
	return &apiError{Status: http.StatusBadRequest, Message: msg, Field: field}
}

// writeJSON writes v as the JSON body of a status response.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// The values written are the client's own types, which marshal;
		// this would be a bug, and is still answered in JSON.
		status, b = http.StatusInternalServerError, []byte(`{"error":"cannot encode the response"}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, e *apiError) { writeJSON(w, e.Status, e) }

// echoMax is the most of a caller's value an error quotes back.
const echoMax = 100

// quote returns s quoted for an error message, cut to echoMax bytes.
func quote(s string) string {
	c := clip(s)
	if len(c) == len(s) {
		return strconv.Quote(s)
	}
	return strconv.Quote(c) + fmt.Sprintf("… (%d bytes)", len(s))
}

// clip returns s cut to echoMax bytes, at a character boundary.
func clip(s string) string {
	if len(s) <= echoMax {
		return s
	}
	cut := echoMax
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// decodeBody reads the body of r, one JSON object of at most maxBody bytes
// (route wraps the body in an http.MaxBytesReader) sent as application/json, into dst, a pointer to a struct whose json tags
// name every field the endpoint accepts. fields lists them, for the error
// an unknown field gets.
func decodeBody(r *http.Request, maxBody int64, dst any, fields string) error {
	ct := r.Header.Get("Content-Type")
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" || (params["charset"] != "" && !strings.EqualFold(params["charset"], "utf-8")) {
		got := "none"
		if ct != "" {
			got = quote(ct)
		}
		return &apiError{Status: http.StatusUnsupportedMediaType,
			Message: fmt.Sprintf("the body must be JSON sent with Content-Type: application/json, got Content-Type %s", got)}
	}
	// The body says everything: a query parameter (?dry_run=true) would
	// be ignored, and the call not do what it says.
	if _, err := query(r, nil); err != nil {
		return err
	}
	tooLarge := &apiError{Status: http.StatusRequestEntityTooLarge,
		Message: fmt.Sprintf("the body is larger than the %d bytes allowed", maxBody)}
	if r.ContentLength > maxBody {
		return tooLarge
	}
	body, err := io.ReadAll(r.Body) // route capped it at maxBody
	if err != nil {
		if errors.As(err, new(*http.MaxBytesError)) {
			return tooLarge
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// The server's read timeout (http.Server.ReadTimeout) ended
			// before the body did: the client stalled, not its request.
			return &apiError{Status: http.StatusRequestTimeout,
				Message: "the body did not arrive in time: the server stopped waiting for it; send it whole, without pausing"}
		}
		return badField("", "cannot read the body: "+err.Error())
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		var (
			maxErr    *http.MaxBytesError
			syntaxErr *json.SyntaxError
			typeErr   *json.UnmarshalTypeError
		)
		switch {
		case errors.As(err, &maxErr):
			return tooLarge
		case errors.Is(err, io.EOF):
			return badField("", "the body is empty: send a JSON object with the fields "+fields)
		case errors.Is(err, io.ErrUnexpectedEOF):
			return badField("", "the body ends before its JSON object does")
		case errors.As(err, &syntaxErr):
			return badField("", fmt.Sprintf("the body is not valid JSON: %s (at byte %d)", strings.TrimPrefix(syntaxErr.Error(), "json: "), syntaxErr.Offset))
		case errors.As(err, &typeErr) && typeErr.Field == "":
			return badField("", fmt.Sprintf("the body must be a JSON object with the fields %s, not %s", fields, article(typeErr.Value)))
		case errors.As(err, &typeErr):
			return badField(typeErr.Field, fmt.Sprintf("%s must be %s, not %s", typeErr.Field, article(jsonType(typeErr.Type.Kind().String())), article(typeErr.Value)))
		}
		if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			if n, err := strconv.Unquote(name); err == nil {
				name = n
			}
			return badField(name, fmt.Sprintf("unknown field %s (the fields are %s)", quote(name), fields))
		}
		return badField("", "the body is not a valid JSON object: "+strings.TrimPrefix(err.Error(), "json: "))
	}
	var more json.RawMessage
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return badField("", "the body holds more after its JSON object: send one object")
	}
	return exactFields(body, dst, fields)
}

// exactFields refuses a field of the JSON object body that encoding/json
// took for one of dst's although it is not written as its json tag is (it
// matches names whatever their case: "Entity" for entity), a field given
// twice (encoding/json keeps the last), a field holding text that is not
// UTF-8 (encoding/json turns it into U+FFFD, making another key of it, see
// notUTF8), and null for a field tagged api:"required", or the field left
// out (encoding/json leaves it empty, which its check would report as an
// invalid name ""). body decoded into dst.
func exactFields(body []byte, dst any, fields string) error {
	var names, required []string
	t := reflect.TypeOf(dst).Elem()
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			names = append(names, name)
			if t.Field(i).Tag.Get("api") == "required" {
				required = append(required, name)
			}
		}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if _, err := dec.Token(); err != nil { // the object's {
		return badField("", "the body is not a valid JSON object: "+err.Error())
	}
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return badField("", "the body is not a valid JSON object: "+err.Error())
		}
		name, _ := tok.(string)
		switch {
		case !slices.Contains(names, name):
			return badField(name, fmt.Sprintf("unknown field %s (the fields are %s, written so: names are case-sensitive)", quote(name), fields))
		case seen[name]:
			return badField(name, fmt.Sprintf("%s is given twice: give it once", name))
		}
		seen[name] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return badField("", "the body is not a valid JSON object: "+err.Error())
		}
		if string(v) == "null" && slices.Contains(required, name) {
			return badField(name, fmt.Sprintf("%s is null: give it as a string", name))
		}
		if what := notUTF8(v); what != "" {
			return badField(name, fmt.Sprintf("%s holds %s: JSON text must be UTF-8, and read as it is it would become another value (U+FFFD in place of it)", name, what))
		}
	}
	for _, name := range required {
		if !seen[name] {
			return badField(name, fmt.Sprintf("%s is missing: give it as a string (the fields are %s)", name, fields))
		}
	}
	return nil
}

// notUTF8 says what of the raw JSON value v is not UTF-8 text, "" when all
// of it is: bytes that are not UTF-8, or an escaped UTF-16 surrogate
// (\ud800-\udfff) that is not half of a pair. encoding/json reads either
// as U+FFFD, so "\xff" and "\udfff" would both name the key "\ufffd".
func notUTF8(v []byte) string {
	if !utf8.Valid(v) {
		return "bytes that are not UTF-8"
	}
	inString := false
	high := false // the escape before was a high surrogate
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !inString {
			inString = c == '"'
			continue
		}
		switch {
		case c == '"':
			inString = false
		case c == '\\' && i+1 < len(v) && v[i+1] == 'u' && i+5 < len(v):
			r, err := strconv.ParseUint(string(v[i+2:i+6]), 16, 16)
			if err != nil {
				return "a \\u escape that is not four hex digits"
			}
			switch {
			case r >= 0xd800 && r < 0xdc00:
				if high {
					return fmt.Sprintf("a lone UTF-16 surrogate escape (before \\u%04x)", r)
				}
				high = true
				i += 5
				continue
			case r >= 0xdc00 && r < 0xe000:
				if !high {
					return fmt.Sprintf("a lone UTF-16 surrogate escape (\\u%04x)", r)
				}
			default:
				if high {
					return "a lone UTF-16 surrogate escape (a high one not followed by a low one)"
				}
			}
			high = false
			i += 5
			continue
		case c == '\\':
			i++ // an escaped character: \" does not end the string
		}
		if high {
			return "a lone UTF-16 surrogate escape (a high one not followed by a low one)"
		}
	}
	return ""
}

// jsonType names the JSON type of a Go kind, for "key must be a string".
func jsonType(kind string) string {
	switch kind {
	case "string":
		return "string"
	case "bool":
		return "bool"
	case "slice", "array":
		return "array"
	case "map", "struct":
		return "object"
	}
	return "number"
}

// article puts "a" or "an" before a JSON type name.
func article(s string) string {
	switch {
	case s == "":
		return s
	case strings.ContainsRune("aeiou", rune(s[0])):
		return "an " + s
	}
	return "a " + s
}
