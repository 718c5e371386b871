module example.com/go-envfile-equals

go 1.22
