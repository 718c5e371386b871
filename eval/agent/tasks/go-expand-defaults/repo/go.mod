module example.com/go-expand-defaults

go 1.22
