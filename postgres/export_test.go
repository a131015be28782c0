package postgres

// SetPruneBatch sets how many records one transaction of HistoryPrune
// deletes.
func (s *Store) SetPruneBatch(n int) { s.pruneBatch = n }
