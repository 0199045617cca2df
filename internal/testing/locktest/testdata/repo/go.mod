module example.com/fixture

go 1.26.0

require github.com/sqlock/sqlock v0.0.0

replace github.com/sqlock/sqlock => ../../../../..
