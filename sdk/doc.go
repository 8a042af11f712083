// Package sdk shows rebound under the official Go SDKs of OpenAI,
// Anthropic and Google Gemini. It has no code of its own: its examples show
// the wiring (an http.Client whose Transport is a rebound.Transport, and
// the SDK's own retries turned off), and its tests drive each SDK against
// the chaos server's provider personalities to compare, failure kind by
// failure kind, what rebound does with what the SDK does alone.
//
// It is a module of its own so that rebound itself depends on nothing but
// the standard library.
package sdk
