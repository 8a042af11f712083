package proxy_test

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/rebound-go/rebound/proxy"
)

// A proxy in front of one upstream (here a test server that answers every
// chat completion): the client changes only its base URL. Each request
// gets an access line; time and latency are left out here.
func ExampleNew() {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"index":0,"message":{"role":"assistant","content":"Hello!"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}`)
	}))
	defer upstream.Close()

	var logs bytes.Buffer
	p, err := proxy.New(proxy.Options{
		Upstream: upstream.URL,
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "latency_ms" {
				return slog.Attr{}
			}
			return a
		}})),
	})
	if err != nil {
		log.Fatal(err)
	}
	front := httptest.NewServer(p)

	resp, err := http.Post(front.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"gpt-x","messages":[{"role":"user","content":"Hi"}]}`))
	if err != nil {
		log.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	front.Close() // waits for the request's access line

	fmt.Println(resp.Status)
	fmt.Println(string(answer))
	fmt.Print(logs.String())
	// Output:
	// 200 OK
	// {"choices":[{"index":0,"message":{"role":"assistant","content":"Hello!"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}
	// {"level":"INFO","msg":"request","kind":"llm","method":"POST","path":"/v1/chat/completions","route":"default","upstream":"upstream","model":"gpt-x","attempts":1,"kinds":[],"status":200,"input_tokens":9,"output_tokens":2}
}
