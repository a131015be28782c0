package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// jobEntitiesSQL walks the (entity, entity_key, check_name) unique index from
// one entity to the next: each step is one index probe for the first entity
// after the last one found, and n counts the steps so that the walk stops at
// the limit.
const jobEntitiesSQL = `
	WITH RECURSIVE e(entity, n) AS (
		(SELECT entity, 1 FROM prescient_jobs WHERE entity > $1 ORDER BY entity LIMIT 1)
		UNION ALL
		SELECT (SELECT j.entity FROM prescient_jobs j WHERE j.entity > e.entity ORDER BY j.entity LIMIT 1), e.n + 1
		FROM e WHERE e.entity IS NOT NULL AND e.n < $2
	)
	SELECT entity FROM e WHERE entity IS NOT NULL ORDER BY n`

// JobEntities is a loose index scan (jobEntitiesSQL): listing n names reads
// about n index entries however many jobs each entity has, where a DISTINCT
// would read every pending job.
func (s *Store) JobEntities(ctx context.Context, after string, limit int) ([]string, error) {
	if limit < 1 {
		return []string{}, nil
	}
	rows, err := s.pool.Query(ctx, jobEntitiesSQL, after, limit)
	if err != nil {
		return nil, fmt.Errorf("list entities: %w", interpretError(ctx, err))
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list entities: %w", interpretError(ctx, err))
	}
	if names == nil {
		names = []string{}
	}
	return names, nil
}
