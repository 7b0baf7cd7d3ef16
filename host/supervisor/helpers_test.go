package supervisor

import (
	"context"
	"io"
	"time"
)

var errEOF = io.EOF

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
