package slots

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestOwnershipCheck(t *testing.T) {
	tests := []struct {
		name     string
		o        Ownership
		n        int
		unowned  []int
		overlaps map[int][]string
		invalid  string
	}{
		{"empty owns all", nil, 4, nil, nil, ""},
		{"split", Ownership{"a": {0, 2}, "b": {1, 3}}, 4, nil, nil, ""},
		{"gap", Ownership{"a": {0, 2}, "b": {1}}, 4, []int{3}, nil, ""},
		{"overlap", Ownership{"a": {0, 1, 2, 3}, "b": {1}}, 4, nil, map[int][]string{1: {"a", "b"}}, ""},
		{"out of range", Ownership{"a": {0, 1, 2, 3, 4}}, 4, nil, nil, "position 4 is outside 0..3"},
		{"repeated", Ownership{"a": {0, 0, 1, 2, 3}}, 4, nil, nil, "listed twice"},
		{"name no server can have", Ownership{"web 1": {0, 1}, "web-2": {2, 3}}, 4, nil, nil, `invalid server name "web 1"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.o.Check(tt.n)
			if !reflect.DeepEqual(r.Unowned, tt.unowned) {
				t.Errorf("Unowned = %v, want %v", r.Unowned, tt.unowned)
			}
			if !reflect.DeepEqual(r.Overlaps, tt.overlaps) {
				t.Errorf("Overlaps = %v, want %v", r.Overlaps, tt.overlaps)
			}
			got := strings.Join(r.Invalid, "; ")
			if (tt.invalid == "") != (got == "") || !strings.Contains(got, tt.invalid) {
				t.Errorf("Invalid = %q, want it to contain %q", got, tt.invalid)
			}
		})
	}
}

func TestOwnershipValidate(t *testing.T) {
	err := Ownership{"a": {0}, "b": {2}}.Validate(4)
	if !errors.Is(err, ErrUnowned) || !strings.Contains(err.Error(), "[1 3]") {
		t.Errorf("Validate = %v, want ErrUnowned naming positions [1 3]", err)
	}
	// Runs of positions no server fires are written first-last, and a long
	// list is cut (an error once listed 86 million positions).
	err = Ownership{"a": {0, 3, 6}}.Validate(100_000)
	if !errors.Is(err, ErrUnowned) || !strings.Contains(err.Error(), "[1 2 4 5 7-99999]") {
		t.Errorf("Validate = %v, want ErrUnowned naming positions [1 2 4 5 7-99999]", err)
	}
	even := Ownership{}
	for p := 0; p < 1000; p += 2 {
		even["a"] = append(even["a"], p)
	}
	err = even.Validate(1000)
	if want := "[1 3 5 7 9 11 13 15 17 19 21 23 25 27 29 31 33 35 37 39 ...] (500 in all)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Validate = %v, want it naming positions %s", err, want)
	}
	// Pairs add two items at once: the cut still comes at 20 (found by a
	// review: one single, then pairs, printed them all).
	pairs := Ownership{"a": {1}}
	for p := 4; p < 1000; p += 3 {
		pairs["a"] = append(pairs["a"], p)
	}
	if err := pairs.Validate(1000); err == nil || !strings.Contains(err.Error(), "...] (") || len(err.Error()) > 300 {
		t.Errorf("Validate = %v, want the list cut", err)
	}
	if err := (Ownership{"a": {0, 1}, "b": {1, 0}}).Validate(2); err != nil {
		t.Errorf("overlapping but complete map: Validate = %v, want nil", err)
	}
}

func TestOwnershipOwns(t *testing.T) {
	o := Ownership{"a": {0, 2}, "b": {1, 3}, "c": {3}}
	if !o.Owns("a", 2) || o.Owns("a", 1) || !o.Owns("c", 3) || o.Owns("z", 0) {
		t.Errorf("Owns gave a wrong answer for %v", o)
	}
	if got := o.Owners(3); !reflect.DeepEqual(got, []string{"b", "c"}) {
		t.Errorf("Owners(3) = %v, want [b c]", got)
	}
	if !(Ownership{}).Owns("anyone", 7) {
		t.Errorf("an empty map must let every server own every position")
	}
}
