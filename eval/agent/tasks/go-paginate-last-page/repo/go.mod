module example.com/go-paginate-last-page

go 1.22
