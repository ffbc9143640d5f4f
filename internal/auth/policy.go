package auth

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// maxPolicyFileSize bounds the policy file LoadPolicyFile reads.
const maxPolicyFileSize = 1 << 20

// Policy says which clients may use which pools through LimiterService. A
// call on pool P by a client whose verified certificate has name N is
// allowed when some rule has a client pattern matching N and a pool pattern
// matching P. Admins (see Config) may use every pool. Callers without a
// verified certificate are refused with UNAUTHENTICATED. In patterns, "*"
// matches any run of characters (including none, and "." and "/"); every
// other character matches itself.
type Policy struct {
	// Rules are tried in turn; the first that allows a call decides.
	Rules []PolicyRule `yaml:"rules"`
}

// PolicyRule lets the clients matching any of Clients use the pools
// matching any of Pools.
type PolicyRule struct {
	// Clients are patterns of client certificate names (CN or DNS SAN).
	Clients []string `yaml:"clients"`
	// Pools are patterns of pool names.
	Pools []string `yaml:"pools"`
}

// LoadPolicyFile reads a Policy from a YAML file of the form
//
//	rules:
//	  - clients: ["worker-*.orders.internal"]
//	    pools: ["orders-*"]
//	  - clients: ["*"]             # every client with a verified certificate
//	    pools: ["shared.*"]
//
// Unknown keys, empty pattern lists and empty patterns are errors.
func LoadPolicyFile(path string) (*Policy, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading policy file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxPolicyFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading policy file %s: %w", path, err)
	}
	if len(data) > maxPolicyFileSize {
		return nil, fmt.Errorf("%s: the file is larger than %d bytes; a policy file should be small", path, maxPolicyFileSize)
	}
	return ParsePolicy(path, data)
}

// ParsePolicy parses the contents of a policy file as LoadPolicyFile does;
// name is used in error messages.
func ParsePolicy(name string, data []byte) (*Policy, error) {
	var p Policy
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&p); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: %s (the file has one key, rules: a list of {clients: [...], pools: [...]})", name, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &p, nil
}

// Validate reports a rule without clients or pools, or an empty pattern.
func (p *Policy) Validate() error {
	for i, r := range p.Rules {
		if len(r.Clients) == 0 || len(r.Pools) == 0 {
			return fmt.Errorf("rule %d needs both clients and pools (lists of patterns; \"*\" matches anything)", i+1)
		}
		for _, pat := range append(append([]string(nil), r.Clients...), r.Pools...) {
			if strings.TrimSpace(pat) == "" {
				return fmt.Errorf("rule %d has an empty pattern", i+1)
			}
		}
	}
	return nil
}

// Allows reports whether a client with any of names may use pool.
func (p *Policy) Allows(names []string, pool string) bool {
	for _, r := range p.Rules {
		if matchAny(r.Pools, pool) && anyNameMatches(r.Clients, names) {
			return true
		}
	}
	return false
}

func anyNameMatches(patterns, names []string) bool {
	for _, n := range names {
		if matchAny(patterns, n) {
			return true
		}
	}
	return false
}

func matchAny(patterns []string, s string) bool {
	for _, p := range patterns {
		if globMatch(p, s) {
			return true
		}
	}
	return false
}

// globMatch matches s against pattern, where "*" matches any run of
// characters. It runs in O(len(pattern)·len(s)) at worst, without
// recursion.
func globMatch(pattern, s string) bool {
	px, sx := 0, 0
	starPx, starSx := -1, 0
	for sx < len(s) {
		switch {
		case px < len(pattern) && pattern[px] == '*':
			starPx, starSx = px, sx
			px++
		case px < len(pattern) && pattern[px] == s[sx]:
			px++
			sx++
		case starPx >= 0:
			starSx++
			px, sx = starPx+1, starSx
		default:
			return false
		}
	}
	for px < len(pattern) && pattern[px] == '*' {
		px++
	}
	return px == len(pattern)
}
