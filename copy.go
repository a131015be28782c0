package prescient

import "fmt"

// CheckJobsImport reports what makes jobs unfit for Store.JobsImport before
// any database is asked: an id that is not positive, or an id or an (entity,
// key, check) that appears twice. Every store calls it first, so that both
// refuse the same input with the same message.
func CheckJobsImport(jobs []*Job) error {
	type identity struct{ entity, key, check string }
	seenID := make(map[int64]bool, len(jobs))
	seenKey := make(map[identity]bool, len(jobs))
	for _, j := range jobs {
		name := j.Entity + "/" + j.Key + "/" + j.Check
		switch k := (identity{j.Entity, j.Key, j.Check}); {
		case j.ID < 1:
			return fmt.Errorf("import %d job(s): job %s has id %d, want a positive id", len(jobs), name, j.ID)
		case seenID[j.ID]:
			return fmt.Errorf("import %d job(s): id %d appears twice (job %s)", len(jobs), j.ID, name)
		case seenKey[k]:
			return fmt.Errorf("import %d job(s): job %s appears twice", len(jobs), name)
		default:
			seenID[j.ID], seenKey[k] = true, true
		}
	}
	return nil
}
