package review

import (
	"embed"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Persona packs (spec P-12): static markdown, one per focus, the system
// prompt's first part. Which one reviews a change is the first chosen of
// the node's, the run's and the session's, else the default.

//go:embed personas/*.md
var personaFiles embed.FS

// Personas are the packs, the default first.
var Personas = []string{"default", "security", "dx", "architecture", "quick"}

// DefaultPersona reviews when nothing chose another.
const DefaultPersona = "default"

// ErrUnknownPersona is a persona that is not a pack.
var ErrUnknownPersona = errors.New("unknown review persona")

// CheckPersona says whether name is a pack ("" is: it takes the default).
func CheckPersona(name string) error {
	if name == "" || slices.Contains(Personas, name) {
		return nil
	}
	return fmt.Errorf("%w %q: available %s", ErrUnknownPersona, name, strings.Join(Personas, ", "))
}

// ResolvePersona is the persona of the first choice made, in precedence
// order (the node's, the run's, the session's), else the default.
func ResolvePersona(choices ...string) string {
	for _, c := range choices {
		if c = strings.TrimSpace(c); c != "" {
			return c
		}
	}
	return DefaultPersona
}

// PersonaText is the pack's markdown.
func PersonaText(name string) (string, error) {
	if err := CheckPersona(name); err != nil {
		return "", err
	}
	b, err := personaFiles.ReadFile("personas/" + ResolvePersona(name) + ".md")
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// contract is how every persona answers.
const contract = `
## How to answer

Call the ` + ToolName + ` tool once, with every finding; with an empty list when you find
nothing. If you cannot call tools, answer with this JSON alone:
{"summary": "...", "findings": [{"severity": "high", "file": "path/as/in/the/diff", "line": 12,
"message": "what is wrong and why", "suggestion": "how to fix it", "category": "correctness"}]}

- severity: critical, high, medium, low or info.
- file: the path as the diff names it; line: the line in the new file (0 when the finding
  is not about one line).
- category: security, correctness, performance, maintainability, style, testing or
  documentation.
- A partial review says so at the top of the change: say in the summary what you could
  not see.
`

// systemPrompt is the persona's pack and the answer's contract.
func systemPrompt(persona string) (string, error) {
	text, err := PersonaText(persona)
	if err != nil {
		return "", err
	}
	return strings.TrimRight(text, "\n") + "\n" + contract, nil
}
