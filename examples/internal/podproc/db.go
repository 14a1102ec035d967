package podproc

import (
	"database/sql"

	_ "github.com/ncruces/go-sqlite3/driver" // SQLite, compiled to Go: no cgo
)

// OpenDB opens the SQLite file shared by an example's processes. A writer
// waits for another's transaction (busy_timeout) instead of failing.
func OpenDB(path string) (*sql.DB, error) {
	return sql.Open("sqlite3", "file:"+path+"?_pragma=busy_timeout(10000)")
}
