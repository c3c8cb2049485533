// A stand-in for the zxcvbn-go password-strength packages, which the Pulumi CLI links only to
// warn that a plain `config set` / `env set` value looks like a secret. The real packages build
// their dictionaries in package init: 0.18 CPU-s of every CLI process, whatever it runs (the
// engine's `up`s included). This estimate is zxcvbn's own fallback for a string it finds no
// pattern in: length x log2 of the character classes it draws from.
package zxcvbn

import "math"

// MinEntropyMatch carries the one field the CLI reads.
type MinEntropyMatch struct {
	Password string
	Entropy  float64
}

// PasswordStrength estimates the entropy of password in bits; userInputs is ignored.
func PasswordStrength(password string, userInputs []string) MinEntropyMatch {
	var lower, upper, digit, other bool
	for _, r := range password {
		switch {
		case r >= 'a' && r <= 'z':
			lower = true
		case r >= 'A' && r <= 'Z':
			upper = true
		case r >= '0' && r <= '9':
			digit = true
		default:
			other = true
		}
	}
	classes := 0
	for _, c := range []struct {
		used bool
		size int
	}{{lower, 26}, {upper, 26}, {digit, 10}, {other, 33}} {
		if c.used {
			classes += c.size
		}
	}
	entropy := 0.0
	if classes > 0 {
		entropy = float64(len([]rune(password))) * math.Log2(float64(classes))
	}
	return MinEntropyMatch{Password: password, Entropy: entropy}
}
