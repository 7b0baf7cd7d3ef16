//go:build linux

package box

import (
	"testing"
	"time"
)

// A run takes a warm box of its own kind only: a box whose python3 has
// the proxy in its environment never runs a program without the
// network, and a plain one never a program with it.
func TestPoolPicksItsKind(t *testing.T) {
	var p pool
	p.init(true, 2)
	plain := &warmBox{id: "plain", image: "stdlib", readyAt: time.Now()}
	withProxy := &warmBox{id: "net", image: "stdlib", net: true}
	for _, wb := range []*warmBox{plain, withProxy} {
		p.boxes[wb.key()] = append(p.boxes[wb.key()], wb)
	}
	if got := p.pick(warmKey{image: "data"}); got != nil {
		t.Fatalf("another image's run took %s", got.id)
	}
	if got := p.pick(warmKey{image: "stdlib", net: true}); got != withProxy || !withProxy.claimed || plain.claimed {
		t.Fatalf("a net run took %v", got)
	}
	if got := p.pick(warmKey{image: "stdlib", net: true}); got != nil {
		t.Fatalf("a second net run took the claimed box %s", got.id)
	}
	if got := p.pick(warmKey{image: "stdlib"}); got != plain {
		t.Fatalf("a plain run took %v", got)
	}
	p.remove(withProxy)
	if !p.holds(plain) || p.holds(withProxy) || len(p.boxes) != 1 {
		t.Fatalf("after remove: %v", p.boxes)
	}
}
