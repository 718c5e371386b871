package toolexec

import "strings"

// shellPatterns force a command through sh -c (spec C-23, with the
// backtick of the YAML form). Quotes, redirections, a lone & and the other
// characters below also need a shell to mean what they say; with none of
// them a command is split on blanks and run directly.
var shellPatterns = []string{"|", "&&", "||", ";", "*", "?", "$", "`",
	"&", "<", ">", "(", ")", "'", "\"", "\\", "~", "{", "}", "[", "]", "#", "\n"}

// NeedsShell reports whether command must run under sh -c.
func NeedsShell(command string) bool {
	for _, p := range shellPatterns {
		if strings.Contains(command, p) {
			return true
		}
	}
	return false
}

// argv is how an invocation runs: sh -c for shell commands (args appended
// as positional parameters "$1"...), else the command's words then args.
func argv(command string, args []string) []string {
	if NeedsShell(command) {
		return append([]string{"/bin/sh", "-c", command, "sh"}, args...)
	}
	return append(strings.Fields(command), args...)
}

// toolKey names the tool of an invocation for per-tool timeouts and
// parsers: the command's first word and, when present, its first argument.
func toolKeys(command string, args []string) []string {
	words := strings.Fields(command)
	if !NeedsShell(command) {
		words = append(words, args...)
	}
	var keys []string
	for n := min(3, len(words)); n >= 1; n-- {
		keys = append(keys, strings.Join(words[:n], " "))
	}
	return keys
}
