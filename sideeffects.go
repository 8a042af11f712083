package rebound

import (
	"net/http"

	"github.com/rebound-go/rebound/internal/provider"
)

// ProviderSideEffects reports whether req may have side effects, by what
// rebound knows of the providers' HTTP APIs. Set as Transport.SideEffects,
// it keeps the requests that create something at a provider (a file, a
// batch, a fine-tuning job, an upload, a vector store, an assistant, a
// thread's message or run) from being made twice.
//
// A request has none when it is a GET, HEAD, OPTIONS or TRACE, or a POST
// to a model call whose only product is its answer, known by the end of
// its path:
//
//	OpenAI, and the servers that speak its API
//	          …/chat/completions  …/completions  …/responses
//	          …/responses/input_tokens  …/embeddings  …/moderations
//	          …/audio/speech  …/audio/transcriptions  …/audio/translations
//	          …/images/generations  …/images/edits  …/images/variations
//	Anthropic …/v1/messages  …/v1/messages/count_tokens  …/v1/complete
//	Gemini    …:generateContent  …:streamGenerateContent  …:countTokens
//	          …:embedContent  …:batchEmbedContents
//	Ollama    …/api/chat  …/api/generate  …/api/embed  …/api/embeddings
//	rerankers …/rerank
//
// Any other request may: a path rebound does not know is taken to create
// something, and so is a path it knows with any other method, or a
// trailing slash. A model call has side effects too when it asks the
// provider to act beyond answering: a Responses call that adds its turn to
// a stored conversation ("conversation") or lets the provider call a
// remote MCP server (a tool of type "mcp"), a Messages call with
// "mcp_servers". For these, and only these, the body of a Responses or
// Messages call is read, through GetBody (without one, a body that cannot
// be read without being consumed is taken to have them), for the JSON
// strings "conversation", "mcp" and "mcp_servers": a quoted name is found
// only where it is a whole key or value, and one that is not what it
// looks like costs a retry, never a duplicate. A stored or background
// answer (Responses' and Chat Completions' "store", Responses'
// "background") is still only the answer, paid for again on a retry as any
// other answer is, and does not count.
func ProviderSideEffects(req *http.Request) bool { return provider.SideEffects(req) }
