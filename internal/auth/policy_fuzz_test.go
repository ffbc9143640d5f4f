package auth

import (
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParsePolicy: a policy file either fails with an error that names the
// file, or gives rules that validate, in which every pattern matches
// itself with its stars matching nothing, and "*" matches any name.
func FuzzParsePolicy(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParsePolicy("policy.yaml", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "policy.yaml") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("policy loaded but does not validate: %v", err)
		}
		for _, r := range p.Rules {
			for _, c := range r.Clients {
				for _, pool := range r.Pools {
					if !p.Allows([]string{strings.ReplaceAll(c, "*", "")}, strings.ReplaceAll(pool, "*", "")) {
						t.Fatalf("rule {clients: %q, pools: %q} does not allow its own names", c, pool)
					}
				}
			}
		}
	})
}

// FuzzGlobMatch checks globMatch against a regular expression in which
// "*" is ".*" and everything else is literal.
func FuzzGlobMatch(f *testing.F) {
	f.Fuzz(func(t *testing.T, pattern, s string) {
		if !utf8.ValidString(pattern) || !utf8.ValidString(s) || len(pattern) > 256 {
			return // the regular expression reads runes; the glob reads bytes
		}
		parts := strings.Split(pattern, "*")
		for i, part := range parts {
			parts[i] = regexp.QuoteMeta(part)
		}
		re := regexp.MustCompile(`(?s)\A` + strings.Join(parts, ".*") + `\z`)
		if got, want := globMatch(pattern, s), re.MatchString(s); got != want {
			t.Fatalf("globMatch(%q, %q) = %v, want %v", pattern, s, got, want)
		}
	})
}
