module github.com/rebound-go/rebound/bolt

go 1.26.0

require (
	github.com/rebound-go/rebound v0.0.0
	go.etcd.io/bbolt v1.5.0
	go.uber.org/goleak v1.3.0
)

require golang.org/x/sys v0.45.0 // indirect

replace github.com/rebound-go/rebound => ../
