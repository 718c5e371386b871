module example.com/go-wordfreq-case

go 1.22
