package agtp

// DeeperThan reports whether the JSON text raw nests arrays and
// objects more than limit levels deep ("[]" is depth 1), and the byte
// offset of the bracket that went past it. It only counts brackets
// outside strings (with their backslash escapes), in one pass and
// without allocating, so a door can bound a message's nesting before
// any parser reads it; whether raw is valid JSON is the parser's
// question. A limit below 0 is treated as 0.
func DeeperThan(raw []byte, limit int) (bool, int) {
	depth, inString, escaped := 0, false, false
	for i, c := range raw {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
			if depth > limit {
				return true, i
			}
		case c == ']' || c == '}':
			depth--
		}
	}
	return false, 0
}
