module example.com/go-ring-order

go 1.22
