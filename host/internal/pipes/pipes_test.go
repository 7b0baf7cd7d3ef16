package pipes

import (
	"io"
	"testing"
)

func TestMake(t *testing.T) {
	ps, err := Make(3)
	if err != nil || len(ps) != 3 {
		t.Fatalf("%v %v", ps, err)
	}
	for i, p := range ps {
		go func() { p.W.Write([]byte{byte(i)}); p.W.Close() }()
		b, err := io.ReadAll(p.R)
		if err != nil || len(b) != 1 || b[0] != byte(i) {
			t.Errorf("pipe %d carried %v (%v)", i, b, err)
		}
		p.R.Close()
	}
}
