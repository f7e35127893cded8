// Package opreg is the Go client of opreg, the operation registry: typed
// calls for every RPC of opreg.v1.OperationRegistry and OperationAdmin, typed
// errors, the parameter digest, and the run-once and worker helpers of
// client/PROTOCOL.md.
package opreg

// Version is this client's version: the repository's VERSION file (one
// version for every opreg package).
const Version = "0.1.0"
