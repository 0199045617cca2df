module github.com/sqlock/sqlock

go 1.26.0

require (
	github.com/DATA-DOG/go-sqlmock v1.5.2
	github.com/glebarez/go-sqlite v1.21.2
	github.com/jackc/pgx/v5 v5.12.0
	github.com/lib/pq v1.12.3
	go.uber.org/goleak v1.3.0
	pgregory.net/rapid v1.3.0
)

require (
	github.com/anishathalye/porcupine v1.3.1
	github.com/go-sql-driver/mysql v1.10.1
	gorm.io/driver/mysql v1.6.0
)

require filippo.io/edwards25519 v1.2.0 // indirect

require github.com/stretchr/testify v1.12.1 // indirect

require (
	github.com/dustin/go-humanize v1.0.1 // indirect
	github.com/glebarez/sqlite v1.11.0
	github.com/google/uuid v1.6.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/jinzhu/inflection v1.0.0 // indirect
	github.com/jinzhu/now v1.1.5 // indirect
	github.com/jmoiron/sqlx v1.4.0
	github.com/mattn/go-isatty v0.0.17 // indirect
	github.com/remyoudompheng/bigfft v0.0.0-20230129092748-24d4a6f8daec // indirect
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.41.0 // indirect
	gorm.io/driver/postgres v1.6.3
	gorm.io/gorm v1.31.2
	modernc.org/libc v1.22.5 // indirect
	modernc.org/mathutil v1.5.0 // indirect
	modernc.org/memory v1.5.0 // indirect
	modernc.org/sqlite v1.23.1 // indirect
)
