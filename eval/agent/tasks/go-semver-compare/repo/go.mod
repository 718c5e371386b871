module example.com/go-semver-compare

go 1.22
