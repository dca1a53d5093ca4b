-- dsql quickstart: tables, a joined and aggregated view, and SUBSCRIBE.
--   dsql run examples/quickstart.sql --echo
-- Under the manual clock (the default for scripts) time moves only by ADVANCE,
-- so the output is the same on every run.

CREATE TABLE customers (id int, name text, city text);
CREATE TABLE orders (id int, customer_id int, amount int);

INSERT INTO customers VALUES (1, 'ann', 'Oslo'), (2, 'bob', 'Lima'), (3, 'cy', 'Oslo');
INSERT INTO orders VALUES (10, 1, 5), (11, 2, 20), (12, 1, 7);

-- Revenue per city, kept up to date as orders and customers change.
CREATE MATERIALIZED VIEW revenue AS
  SELECT c.city, count(*) AS orders, sum(o.amount) AS total
  FROM orders o JOIN customers c ON o.customer_id = c.id
  GROUP BY c.city;

-- The snapshot first (at time 0), then every change as it happens.
SUBSCRIBE revenue;

ADVANCE TO 1000;
INSERT INTO orders VALUES (13, 3, 30);               -- an insert: Oslo grows

ADVANCE TO 2000;
UPDATE orders SET amount = 25 WHERE id = 11;         -- an update: retract, then insert

ADVANCE TO 3000;
DELETE FROM customers WHERE name = 'bob';            -- a delete: Lima disappears

ADVANCE TO 4000;
SELECT * FROM revenue ORDER BY city;
