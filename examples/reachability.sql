-- Reachability with WITH RECURSIVE, maintained while edges come and go.
--   dsql run examples/reachability.sql --echo
-- Deleting an edge retracts exactly what was reachable only through it; nodes that
-- stay reachable another way stay (no self-supporting derivations are left behind).

CREATE TABLE edges (src int, dst int);
CREATE TABLE roots (node int);

INSERT INTO roots VALUES (1);
INSERT INTO edges VALUES (1, 2), (2, 3), (3, 4), (1, 5), (5, 4), (4, 6), (7, 8);

CREATE MATERIALIZED VIEW reach AS
  WITH RECURSIVE r (node) AS (
    SELECT node FROM roots
    UNION
    SELECT e.dst FROM r JOIN edges e ON e.src = r.node
  )
  SELECT node FROM r;

SUBSCRIBE reach;

ADVANCE TO 1000;
DELETE FROM edges WHERE src = 2 AND dst = 3;   -- 3 goes; 4 stays reachable through 5

ADVANCE TO 2000;
DELETE FROM edges WHERE src = 1 AND dst = 5;   -- now 4 and 6 go too, and 5

ADVANCE TO 3000;
INSERT INTO edges VALUES (6, 7), (2, 4);       -- 4, 6, 7 and 8 become reachable

ADVANCE TO 4000;
SELECT node FROM reach ORDER BY node;
