module github.com/rebound-go/rebound/bench/peers

go 1.26

require (
	github.com/avast/retry-go/v4 v4.7.0
	github.com/cenkalti/backoff/v5 v5.0.3
	github.com/failsafe-go/failsafe-go v0.9.8
	github.com/rebound-go/rebound v0.0.0
)

require (
	github.com/bits-and-blooms/bitset v1.24.4 // indirect
	github.com/sony/gobreaker/v2 v2.4.0 // indirect
)

replace github.com/rebound-go/rebound => ../..
