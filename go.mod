module github.com/rebound-go/rebound

go 1.26
