package chaos_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/rebound-go/rebound/chaos"
)

func Example() {
	s, err := chaos.New(chaos.Config{Seed: 1})
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(s)
	defer srv.Close()

	for _, mode := range []string{chaos.ModeDown, chaos.ModeBadRequest} {
		req, _ := http.NewRequest("GET", srv.URL+"/v1/chat/completions", nil)
		req.Header.Set(chaos.HeaderMode, mode)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Println(mode, resp.Status)
	}

	resp, err := http.Get(srv.URL + chaos.StatsPath)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	stats, _ := io.ReadAll(resp.Body)
	fmt.Print(string(stats))
	// Output:
	// down 503 Service Unavailable
	// badreq 400 Bad Request
	// {"requests":2,"by_status":{"400":1,"503":1},"input_tokens":0,"output_tokens":0,"tallies":{"":{"":{"requests":2,"input_tokens":0,"output_tokens":0}}}}
}

// A server in a provider's profile fails in the provider's words, here with a
// wait hint the request asked for.
func ExampleConfig_profile() {
	s, err := chaos.New(chaos.Config{Profile: chaos.ProfileAnthropic, Mode: chaos.ModeOverload})
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(s)
	defer srv.Close()

	req, _ := http.NewRequest("POST", srv.URL+"/v1/messages", strings.NewReader(`{"model":"claude-x","max_tokens":64}`))
	req.Header.Set(chaos.HeaderRetryAfter, "30")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, "Retry-After:", resp.Header.Get("Retry-After"))
	fmt.Print(string(body))
	// Output:
	// 529 Retry-After: 30
	// {"type":"error","error":{"type":"overloaded_error","message":"Overloaded","details":null},"request_id":"req_chaos_0"}
}

// With a prompt cache, a prompt sent again through the same key is read
// from the cache; through another key it is written anew. The prompt is
// 4800 bytes of system prompt and 400 of message: 1300 tokens.
func ExampleConfig_promptCache() {
	s, err := chaos.New(chaos.Config{Profile: chaos.ProfileAnthropic, Mode: chaos.ModeOK, PromptCache: true})
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(s)
	defer srv.Close()

	body := `{"model":"claude-x","max_tokens":64,"system":"` + strings.Repeat("s", 4800) +
		`","messages":[{"role":"user","content":"` + strings.Repeat("u", 400) + `"}]}`
	for _, key := range []string{"sk-one", "sk-one", "sk-two"} {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/messages", strings.NewReader(body))
		req.Header.Set("X-Api-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		var m struct {
			Usage struct {
				Read    int `json:"cache_read_input_tokens"`
				Written int `json:"cache_creation_input_tokens"`
			}
		}
		json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		fmt.Printf("%s: %d read, %d written\n", key, m.Usage.Read, m.Usage.Written)
	}
	st := s.Stats()
	fmt.Println("billed:", st.InputTokens, "in,", st.CacheReadTokens, "read,", st.CacheWriteTokens, "written")
	// Output:
	// sk-one: 0 read, 1300 written
	// sk-one: 1300 read, 0 written
	// sk-two: 0 read, 1300 written
	// billed: 0 in, 1300 read, 2600 written
}
