package version

// Version and Commit are set with -ldflags -X; an unstamped build says so.
var (
	Version = "dev"
	Commit  = "unknown"
)
