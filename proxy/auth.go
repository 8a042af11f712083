package proxy

// unauthorizedBody is the proxy's 401, when internal/frontdoor finds no
// client token where the request's SDK sends its key.
const unauthorizedBody = `{"error":{"message":"missing or wrong proxy token (send it where your SDK sends its key: Authorization: Bearer, x-api-key, x-goog-api-key, api-key or ?key=)","type":"authentication_error","code":401}}`
