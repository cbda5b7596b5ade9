package traces

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"time"
)

// Imported files streamed from disk. Open reads a regular file once, whole,
// keeping no row (scanFile); a Stream reads it again, row by row, with the
// same rowReader, and checks that it is the file Open read (fileSource,
// fileReader).

// fileSource is what a Stream needs to read a segment again from its file,
// and what identifies the file as Open read it.
type fileSource struct {
	seg    *segment
	path   string
	format string
	index  int       // position in the concatenation (seeds prefix groups)
	size   int64     // bytes
	mod    time.Time // modification time
	sum    [sha256.Size]byte
}

// scanFile is importFile for a regular file: one pass over file (already
// opened; st its Stat) that checks every row and keeps none. Rows out of
// time order are read again into memory and sorted (loadSorted).
func scanFile(file *os.File, st os.FileInfo, path, f string, index int, h hash.Hash) (seg *segment, err error) {
	defer func() {
		if p := recover(); p != nil {
			seg, err = nil, fmt.Errorf("%s: cannot import: internal error: %v", path, p)
		}
	}()
	errs := &importErrors{source: path}
	fh := sha256.New()
	rd := newRowReader(f, io.TeeReader(file, io.MultiWriter(h, fh)), errs, false)
	var rw row
	var n, descents int
	var first, last, prev int64
	for rd.next(&rw) {
		if n == 0 {
			first, last = rw.at, rw.at
		} else {
			if rw.at < prev {
				descents++
			}
			first, last = min(first, rw.at), max(last, rw.at)
		}
		prev = rw.at
		n++
	}
	notes := rd.finish()
	if errs.failed() {
		return nil, errs.err()
	}
	// Sorted or not, the first and last arrivals are the least and the
	// greatest: the span is checked here, so that the second pass of a
	// file to sort fails only when the file changed.
	if seg, err = newSegment(errs, classOf(path), n, first, last, notes); err != nil {
		return nil, err
	}
	src := &fileSource{path: path, format: f, index: index, size: st.Size(), mod: st.ModTime()}
	fh.Sum(src.sum[:0])
	if descents > 0 {
		return src.loadSorted()
	}
	seg.src, src.seg = src, seg
	return seg, nil
}

// loadSorted reads the file again into memory, checking that it is the
// one the first pass read, and builds its sorted segment.
func (src *fileSource) loadSorted() (*segment, error) {
	file, err := src.reopen()
	if err != nil {
		return nil, err
	}
	defer file.Close()
	fh := sha256.New()
	errs := &importErrors{source: src.path}
	perRow := int64(36)
	if src.format == FormatMooncake {
		perRow = 80
	}
	seg, err := readSegment(newRowReader(src.format, io.TeeReader(file, fh), errs, false), errs, src.size, perRow, classOf(src.path), src.index)
	if err != nil {
		return nil, src.changed(err.Error())
	}
	if _, err := io.Copy(fh, file); err != nil {
		return nil, src.changed(err.Error())
	}
	if !bytes.Equal(fh.Sum(nil), src.sum[:]) {
		return nil, src.changed(fmt.Sprintf("SHA-256 now %x", fh.Sum(nil)))
	}
	return seg, nil
}

// changed is the error of a file that is no longer what Open read.
func (src *fileSource) changed(what string) error {
	return fmt.Errorf("trace %q: changed since the trace was opened (%s): expected the file as it was then, %d bytes, modified %s, SHA-256 %s, unchanged while its requests are read",
		src.path, what, src.size, src.mod.UTC().Format(time.RFC3339Nano), hex.EncodeToString(src.sum[:]))
}

// same checks a file's size and modification time against Open's.
func (src *fileSource) same(st os.FileInfo) error {
	if st.Size() != src.size || !st.ModTime().Equal(src.mod) {
		return src.changed(fmt.Sprintf("now %d bytes, modified %s", st.Size(), st.ModTime().UTC().Format(time.RFC3339Nano)))
	}
	return nil
}

// check reports whether the file is still there and looks unchanged (size
// and modification time), without opening it.
func (src *fileSource) check() error {
	st, err := os.Stat(src.path)
	if err != nil {
		return src.gone(err)
	}
	return src.same(st)
}

func (src *fileSource) gone(err error) error {
	return fmt.Errorf("trace %q: cannot read it again to stream its requests: %w: expected the file as it was when the trace was opened (%d bytes, SHA-256 %s)",
		src.path, err, src.size, hex.EncodeToString(src.sum[:]))
}

// reopen opens the file again and checks its size and modification time.
func (src *fileSource) reopen() (*os.File, error) {
	file, err := os.Open(src.path)
	if err != nil {
		return nil, src.gone(err)
	}
	st, err := file.Stat()
	if err == nil {
		err = src.same(st)
	} else {
		err = src.gone(err)
	}
	if err != nil {
		file.Close()
		return nil, err
	}
	return file, nil
}

// fileReader reads a streamed segment's requests from its file, in file
// order (which is time order: Open checked it), checking each row against
// what Open found and the file's SHA-256 at its end.
type fileReader struct {
	src  *fileSource
	file *os.File
	h    hash.Hash
	errs *importErrors
	rd   rowReader
	conv *rowConverter
	n    int   // requests handed out
	prev int64 // the last one's arrival, ns on the file's clock
	err  error // why next stopped early
}

// open opens the file for a stream.
func (src *fileSource) open() (*fileReader, error) {
	file, err := src.reopen()
	if err != nil {
		return nil, err
	}
	r := &fileReader{src: src, file: file, h: sha256.New(), errs: &importErrors{source: src.path}, conv: newRowConverter(src.seg, src.index, 0)}
	r.rd = newRowReader(src.format, io.TeeReader(file, r.h), r.errs, true)
	r.prev = src.seg.first
	return r, nil
}

// next stores the next request in out, At relative to the file's first
// arrival, or reports false at the end of the file or when it changed
// (err).
func (r *fileReader) next(out *Request) bool {
	if r.err != nil || r.file == nil {
		return false
	}
	var rw row
	if !r.rd.next(&rw) {
		r.rd.finish()
		switch {
		case r.errs.failed():
			r.err = r.src.changed(r.errs.err().Error())
		case r.n != r.src.seg.n:
			r.err = r.src.changed(fmt.Sprintf("%d rows now: expected %d", r.n, r.src.seg.n))
		default:
			if _, err := io.Copy(r.h, r.file); err != nil {
				r.err = r.src.changed(err.Error())
			} else if sum := r.h.Sum(nil); !bytes.Equal(sum, r.src.sum[:]) {
				r.err = r.src.changed(fmt.Sprintf("SHA-256 now %x", sum))
			}
		}
		r.close()
		return false
	}
	seg := r.src.seg
	if r.n >= seg.n || rw.at < r.prev || rw.at-seg.first > int64(seg.last) {
		r.err = r.src.changed(fmt.Sprintf("%s:%d: row %d at %d ns: expected at most %d rows, in time order, within [%d, %d] ns",
			r.src.path, r.rd.lineNo(), r.n+1, rw.at, seg.n, seg.first, seg.first+int64(seg.last)))
		r.close()
		return false
	}
	r.prev = rw.at
	r.n++
	*out = r.conv.request(&rw, r.rd.ids())
	return true
}

// close closes the file; next then reports false.
func (r *fileReader) close() {
	if r.file != nil {
		r.file.Close()
		r.file = nil
	}
}
