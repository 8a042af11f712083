module github.com/rebound-go/rebound

go 1.26.0

require golang.org/x/time v0.16.0

require go.uber.org/goleak v1.3.0
