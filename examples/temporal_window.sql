-- A sliding window with mz_now(): events count for 5 seconds after they happen.
--   dsql run examples/temporal_window.sql --echo
-- A temporal filter bounds the interval a row is present in: each event enters the
-- view at its own time `at_ms` and leaves 5000 ms later, with no further writes.
-- ADVANCE moves the manual clock, and rows retire on schedule.

CREATE TABLE events (id int, sensor text, at_ms bigint);

CREATE MATERIALIZED VIEW last_5s AS
  SELECT sensor, count(*) AS events
  FROM events
  WHERE mz_now() >= at_ms AND mz_now() < at_ms + 5000
  GROUP BY sensor;

SUBSCRIBE last_5s;

INSERT INTO events VALUES (1, 'a', 0), (2, 'b', 0);
ADVANCE TO 2000;
INSERT INTO events VALUES (3, 'a', 2000);
ADVANCE TO 4000;
INSERT INTO events VALUES (4, 'a', 6000);          -- stamped in the future: enters at 6000
ADVANCE TO 5500;                                  -- events 1 and 2 have retired
SELECT * FROM last_5s ORDER BY sensor;
ADVANCE TO 8000;                                  -- event 3 retired, event 4 entered
SELECT * FROM last_5s ORDER BY sensor;
ADVANCE TO 12000;                                 -- everything retired
SELECT count(*) AS sensors FROM last_5s;
