// Package jsonscan is rebound's one reader of JSON names: every decision
// rebound takes by what a JSON document names (the model a request asks
// for, the fields that make a provider act beyond answering, the tool an
// MCP call runs, the token counts an answer reports, what a stream's event
// means, a log line's fields) reads the document through a Scanner, so
// that the rules below are written once.
//
// The danger it guards against is a document that two readers read
// differently: the proxy routes a request by the model it reads, the
// provider serves the model it reads; rebound lets a tool call be sent
// again by the name it reads, the server runs the tool it reads. Parsers
// disagree about keys in three ways, and a Scanner refuses each for the
// keys a caller decides by, which it names in a [Names]:
//
//   - Escapes. "mod\u0065l" is the key model to every parser. A Scanner
//     compares a key's text, its escapes resolved, never its spelling.
//   - Case and second spellings. Go's encoding/json takes "Model" and
//     "MODEL" (and "mcp_ſervers", with a long s, for mcp_servers) for the
//     field it folds to; Python's json does not; a C parser stops a key at
//     an escaped NUL, so "model\u0000x" is model to it. A key that is not
//     a name but one of these readings of it is refused ([ErrKeySpelling]).
//   - Duplicates. Of a key given twice, Go and Python take the last
//     value, some parsers the first, some refuse. A name given twice in
//     one object is refused ([ErrDuplicateKey]).
//
// Keys the caller does not name are read as any other: a document may
// repeat or fold them as it likes, since no decision hangs on them.
//
// Beyond names, a Scanner checks the document against the grammar of
// RFC 8259 as it reads: no trailing commas or bytes, no NaN, no leading
// zeros, escapes and control characters as the grammar has them, nesting
// at most [DefaultMaxDepth] deep (encoding/json's bound) or MaxDepth. With
// Strict set, every string is valid UTF-8 too, as RFC 8259 requires of
// JSON exchanged between systems: that is the reading for a body rebound
// routes; without it, invalid bytes in a string are let through, as
// encoding/json reads them. A document the Scanner finds at fault gives
// nothing: the first fault stops it, and Err says where and why.
//
// A Scanner reads in place and copies nothing but a key it must unescape
// to compare, into a buffer it keeps: reading a document allocates
// nothing. It is not safe for concurrent use; its zero value is ready.
//
// FuzzScannerReadsAsEncodingJSON holds a Scanner to encoding/json: what a
// Scanner accepts encoding/json accepts, every string and integer it
// reads is what encoding/json decodes, and what it refuses for a key is a
// key encoding/json would fold or see twice.
package jsonscan
