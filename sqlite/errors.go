package sqlite

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"

	msqlite "modernc.org/sqlite"

	"github.com/prescient-dev/prescient/driver"
)

// sqliteReadOnly is SQLITE_READONLY, the primary result code of a write to
// a database this process may only read.
const sqliteReadOnly = 8

// sqliteNotADB is SQLITE_NOTADB: the file is not a SQLite database.
const sqliteNotADB = 26

// ErrCopied is the error (wrapped) of a write to a file `prescient copy`
// copied to another store: its jobs live there now, and the file refuses
// every write of prescient's, from any program (see copiedTriggers), until
// its mark is deleted (DELETE FROM prescient_copied). Store.Copied says
// where and when it was copied.
var ErrCopied = errors.New("the file was copied to another store (prescient copy) and takes no more writes: use the copy")

// copiedRefusal is what copiedTriggers raise.
const copiedRefusal = "was copied to another store (prescient copy) and takes no more writes"

// interpretError translates an error from database/sql or the driver into the
// domain's terms at the store's boundary: no rows is driver.ErrNotFound,
// and an SQLite error keeps its message and result code but not its driver
// type. Other errors (a cancelled context, a closed database) pass through
// unchanged, so that errors.Is still finds context.Canceled and its kin.
func interpretError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return driver.ErrNotFound
	}
	var se *msqlite.Error
	if errors.As(err, &se) {
		if strings.Contains(se.Error(), "no such table: prescient_") {
			return fmt.Errorf("%w (sqlite: %s)", driver.ErrNotMigrated, se.Error())
		}
		if strings.Contains(se.Error(), copiedRefusal) {
			return fmt.Errorf("%w (to use the file again anyway: DELETE FROM prescient_copied)", ErrCopied)
		}
		if se.Code()&0xff == sqliteReadOnly {
			return fmt.Errorf("sqlite: %s: %w", se.Error(), ErrNotWritable)
		}
		if se.Code()&0xff == sqliteNotADB {
			return fmt.Errorf("%w: a file of another kind, or damaged (sqlite: %s)", ErrNotAFile, se.Error())
		}
		return fmt.Errorf("sqlite: %s", se.Error())
	}
	return err
}
