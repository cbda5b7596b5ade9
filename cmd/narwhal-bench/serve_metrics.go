package main

// Err reports the journal's sticky error (nil before one is open), so the
// router's narwhal_journal_errors_total counts the records it lost.
func (j *journalRecorder) Err() error {
	if j.w == nil {
		return nil
	}
	return j.w.Err()
}
