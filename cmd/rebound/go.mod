module github.com/rebound-go/rebound/cmd/rebound

go 1.26.0

require github.com/rebound-go/rebound v0.0.0

require golang.org/x/time v0.16.0 // indirect

replace github.com/rebound-go/rebound => ../..
