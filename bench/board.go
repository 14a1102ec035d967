package bench

import (
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// board is a few counters in a file mapped into memory by every process of
// a run (and by every goroutine of one process), so that holders can
// coordinate without sending anything to Redis: the traffic that Redis
// counts is then the libraries' own.
type board struct {
	file  *os.File
	words []int64
}

// Counter slots.
const (
	slotAcquired = iota // acquisitions so far, across processes
	slotGo              // set to 1 when every holder may start
	boardSlots
)

// createBoard makes a zeroed board file at path and maps it.
func createBoard(path string) (*board, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	if err := f.Truncate(int64(os.Getpagesize())); err != nil {
		f.Close()
		return nil, err
	}
	return mapBoard(f)
}

// openBoard maps an existing board file.
func openBoard(path string) (*board, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	return mapBoard(f)
}

func mapBoard(f *os.File) (*board, error) {
	mem, err := syscall.Mmap(int(f.Fd()), 0, os.Getpagesize(), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("mapping the board: %w", err)
	}
	// A page is 8-byte aligned, so each word can be used atomically.
	words := unsafe.Slice((*int64)(unsafe.Pointer(&mem[0])), boardSlots)
	return &board{file: f, words: words}, nil
}

func (b *board) slot(i int) *int64 { return &b.words[i] }

// acquired records one acquisition and returns its number (1-based).
func (b *board) acquired() int64 { return atomic.AddInt64(b.slot(slotAcquired), 1) }

// count returns the acquisitions so far.
func (b *board) count() int64 { return atomic.LoadInt64(b.slot(slotAcquired)) }

// start lets every holder go.
func (b *board) start() { atomic.StoreInt64(b.slot(slotGo), 1) }

// started reports whether start was called.
func (b *board) started() bool { return atomic.LoadInt64(b.slot(slotGo)) == 1 }

// waitPast waits until the count exceeds n (another holder acquired after
// the caller's acquisition number n) or until stop says so. It polls the
// shared memory: a local check, no Redis traffic.
func (b *board) waitPast(n int64, stop func() bool) {
	for b.count() <= n && !stop() {
		time.Sleep(20 * time.Microsecond)
	}
}

// close unmaps the board.
func (b *board) close() error {
	mem := unsafe.Slice((*byte)(unsafe.Pointer(&b.words[0])), os.Getpagesize())
	err := syscall.Munmap(mem)
	if cerr := b.file.Close(); err == nil {
		err = cerr
	}
	return err
}
