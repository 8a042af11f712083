package cost

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/rebound-go/rebound/chaos"
)

// fuzzTargets are the chaos server's answers a fuzzed body is sent to: a
// profile and a path, in text mode (answers of 40 to 80 words, which an
// output cap cuts) or ok mode.
var fuzzTargets = []struct{ profile, path, mode string }{
	{chaos.ProfileOpenAI, chatPath, chaos.ModeText},
	{chaos.ProfileOpenAI, responsesPath, chaos.ModeText},
	{chaos.ProfileAnthropic, messagesPath, chaos.ModeText},
	{chaos.ProfileGemini, geminiPath, chaos.ModeText},
	{chaos.ProfileGemini, "/v1beta/models/gem:streamGenerateContent", chaos.ModeText},
	{chaos.ProfileLocal, chatPath, chaos.ModeText},
	{chaos.ProfileAzure, "/openai/deployments/dep/chat/completions", chaos.ModeOK},
	{chaos.ProfileGemini, chatPath, chaos.ModeText}, // Gemini's fields where OpenAI's are expected
	{chaos.ProfilePlain, "/v2/generate", chaos.ModeText},
}

// fuzzPrice holds a request that names no output cap at more than any
// answer of the chaos server (at most 80 words: under 240 tokens), and
// kept context at what the chaos server is told it holds.
var fuzzPrice = Price{InputPerMillion: 1, OutputPerMillion: 1, MaxOutputTokens: 512, MaxInputTokens: fuzzKept}

const fuzzKept = 1000

// FuzzEstimate checks that no request body makes the estimate lower than
// what the chaos server bills for it: the chaos server reads every field
// that caps, multiplies or adds to an answer as the most generous server
// would (see chaos's Token usage), and the estimate must hold input and
// output each at least at what it billed.
func FuzzEstimate(f *testing.F) {
	for i, body := range []string{
		`{"model":"m","max_tokens":1,"max_completion_tokens":100,"messages":[{"role":"user","content":"Hi"}]}`,
		`{"model":"m","MAX_TOKENS":100,"max_tokens":1,"n":3,"messages":[{"role":"user","content":"Hi"}]}`,
		`{"generationConfig":{"maxOutputTokens":1,"candidate_count":4,"thinkingConfig":{"thinkingBudget":50}},"contents":[{"parts":[{"text":"Hi"}]}]}`,
		`{"generation_config":{"max_output_tokens":100},"cachedContent":"cachedContents/c","contents":[{"parts":[{"text":"Hi"}]}]}`,
		`{"model":"m","prompt":{"id":"pmpt_1"},"max_output_tokens":1,"input":"Hi"}`,
	} {
		f.Add(uint8(i), []byte(body))
	}
	f.Fuzz(func(t *testing.T, kind uint8, body []byte) {
		target := fuzzTargets[int(kind)%len(fuzzTargets)]
		srv, err := chaos.New(chaos.Config{Mode: target.mode, Seed: 1, Profile: target.profile})
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest("POST", "http://provider.test"+target.path, bytes.NewReader(body))
		req.Header.Set(chaos.HeaderContextTokens, strconv.Itoa(fuzzKept))
		held := read(t, req).most(fuzzPrice)
		srv.ServeHTTP(httptest.NewRecorder(), req)
		st := srv.Stats()
		if int64(st.InputTokens) > held.InputTokens || int64(st.OutputTokens) > held.OutputTokens {
			t.Fatalf("%s %s (%s profile): held at %d in, %d out; the chaos server billed %d in, %d out",
				req.Method, target.path, target.profile, held.InputTokens, held.OutputTokens, st.InputTokens, st.OutputTokens)
		}
	})
}
