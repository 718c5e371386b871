module example.com/go-retry-last-error

go 1.22
