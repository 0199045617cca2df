package inspect

// LeaseTableIdent is leaseTableIdent, for the test that holds it to
// package lease's own naming of the table.
var LeaseTableIdent = leaseTableIdent
