package proxyrun

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// ReadTokens reads the client tokens from the environment variable env (a
// comma-separated list) and the file (one a line), never from the command
// line, where ps would show them.
func ReadTokens(env, file string) ([]string, error) {
	var tokens []string
	if env != "" {
		v := os.Getenv(env)
		if v == "" {
			return nil, fmt.Errorf("--token-env: environment variable %s is not set", env)
		}
		tokens = append(tokens, strings.Split(v, ",")...)
	}
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--tokens-file: %v", err)
		}
		tokens = append(tokens, strings.Split(string(data), "\n")...)
	}
	var kept []string
	for _, t := range tokens {
		if t = strings.TrimSpace(t); t != "" {
			kept = append(kept, t)
		}
	}
	if (env != "" || file != "") && len(kept) == 0 {
		return nil, errors.New("no client token in --token-env or --tokens-file")
	}
	return kept, nil
}
