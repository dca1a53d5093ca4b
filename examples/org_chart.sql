-- The differential dataflow book's skip-level example, in SQL: who manages whom
-- two levels up, kept current while people move around the org chart.
--   dsql run examples/org_chart.sql --echo
-- manages(manager, person): each person's direct manager.

CREATE TABLE manages (manager int, person int);

-- As in the book, person p first reports to p / 2 (rounded down).
INSERT INTO manages VALUES (0, 1), (1, 2), (1, 3), (2, 4), (2, 5), (3, 6), (3, 7), (4, 8), (4, 9);

-- skip-level: the manager of a person's manager.
CREATE MATERIALIZED VIEW skip_level AS
  SELECT m2.manager AS boss, m1.person
  FROM manages m1 JOIN manages m2 ON m1.manager = m2.person;

-- How many people each boss has two levels down.
CREATE MATERIALIZED VIEW span AS
  SELECT boss, count(*) AS reports FROM skip_level GROUP BY boss;

SELECT * FROM skip_level ORDER BY boss, person;

SUBSCRIBE span;

-- As in the book, each person moves from manager p / 2 to manager p / 3, one per tick.
ADVANCE TO 1;
UPDATE manages SET manager = 0 WHERE person = 2;   -- 2 / 3 = 0
ADVANCE TO 2;
UPDATE manages SET manager = 1 WHERE person = 4;   -- 4 / 3 = 1
ADVANCE TO 3;
UPDATE manages SET manager = 2 WHERE person = 7;   -- 7 / 3 = 2
ADVANCE TO 4;
DELETE FROM manages WHERE person = 9;              -- 9 leaves
ADVANCE TO 5;

SELECT * FROM skip_level ORDER BY boss, person;
SELECT * FROM span ORDER BY boss;
