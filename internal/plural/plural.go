// Package plural writes a count with its noun in the singular or the
// plural, for the messages operators and agents read ("1 file", "3
// files", "0 records").
package plural

import "strconv"

// Count is n followed by one when n is 1 (or -1), else by many: Count(1,
// "file", "files") is "1 file", Count(0, "file", "files") "0 files". The
// caller gives both forms, so irregular nouns and agreeing verbs ("file
// holds", "files hold") work as well.
func Count[N ~int | ~int64](n N, one, many string) string {
	if n == 1 || n == -1 {
		return strconv.FormatInt(int64(n), 10) + " " + one
	}
	return strconv.FormatInt(int64(n), 10) + " " + many
}
