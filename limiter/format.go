package limiter

import "strconv"

// Small formatting helpers for error messages.

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func ftoa(f float64) string { return strconv.FormatFloat(f, 'f', 2, 64) }

func quote(s string) string { return strconv.Quote(s) }
