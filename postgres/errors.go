package reboundpg

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/rebound-go/rebound/batch"
)

// fail wraps an error of the database in one line naming the batch and
// the method. (pgx puts each address it failed to connect to on a line of
// its own.)
func (j *Journal) fail(method string, err error) error {
	err = fmt.Errorf("reboundpg: %s of batch %q: %w", method, j.batch, err)
	if msg := err.Error(); strings.Contains(msg, "\n") {
		msg = strings.Join(strings.Fields(strings.ReplaceAll(msg, "\n", "; ")), " ")
		err = &lineError{msg: msg, err: err}
	}
	return j.redact(err)
}

// lineError is an error whose message is made one line.
type lineError struct {
	msg string
	err error
}

func (e *lineError) Error() string { return e.msg }

func (e *lineError) Unwrap() error { return e.err }

// redactor returns a function that removes the passwords in url, and the
// ones given, from an error's message. pgx leaves passwords out of its
// errors; this makes sure, whatever the error's source.
func redactor(url string, more ...string) func(error) error {
	secrets := slices.Clone(more)
	secrets = append(secrets, urlPasswords(url)...)
	secrets = slices.DeleteFunc(secrets, func(s string) bool { return s == "" })
	return func(err error) error {
		if err == nil {
			return nil
		}
		msg := err.Error()
		leaked := false
		for _, s := range secrets {
			if strings.Contains(msg, s) {
				msg, leaked = strings.ReplaceAll(msg, s, "xxxxx"), true
			}
		}
		if !leaked {
			return err
		}
		return &redactedError{msg: msg, kind: kindOf(err)}
	}
}

var dsnPassword = regexp.MustCompile(`(?i)password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)`)

// urlPasswords finds the passwords a connection string may hold, in the
// forms it may hold them (raw and decoded).
func urlPasswords(s string) []string {
	var out []string
	if u, err := url.Parse(s); err == nil {
		if pw, ok := u.User.Password(); ok {
			out = append(out, pw, url.QueryEscape(pw), url.PathEscape(pw))
		}
		if pw := u.Query().Get("password"); pw != "" {
			out = append(out, pw, url.QueryEscape(pw))
		}
	}
	if _, rest, ok := strings.Cut(s, "://"); ok {
		// A URL that does not parse still carries user:password@ before the host.
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if _, pw, ok := strings.Cut(rest[:at], ":"); ok {
				out = append(out, pw)
				if dec, err := url.PathUnescape(pw); err == nil {
					out = append(out, dec)
				}
			}
		}
	}
	for _, m := range dsnPassword.FindAllStringSubmatch(s, -1) {
		out = append(out, strings.Trim(m[1], "'"))
	}
	return out
}

// redactedError is an error whose message held a password: it keeps the
// message without it, and only the sentinel errors of its chain.
type redactedError struct {
	msg  string
	kind error
}

func (e *redactedError) Error() string { return e.msg }

func (e *redactedError) Unwrap() error { return e.kind }

// kindOf returns the sentinel error err wraps that callers test for, if
// any: a redacted error keeps them and drops the rest of its chain, which
// may hold the password.
func kindOf(err error) error {
	for _, k := range []error{batch.ErrDifferentInput, ErrClosed, ErrUnreachable, context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, k) {
			return k
		}
	}
	return nil
}
