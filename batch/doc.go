// Package batch runs files of LLM requests in the OpenAI Batch API's format
// against any provider, and resumes them without sending again what has
// succeeded.
package batch
