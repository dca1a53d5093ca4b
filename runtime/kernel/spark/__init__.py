"""The Spark kernel: frames are Spark DataFrames, steps are Spark SQL over them.

`SparkKernel` is built in layers, one module each, every layer a class the next extends:

- `frames`: `SparkFrames`, DataFrames made from Arrow, queries over them, read into the
  driver; what is known of each frame while it lives (its Arrow source, order, buckets);
- `storage`: `SparkStorage`, batches written as Parquet (or a bucketed table) under the
  storage root, verified, read back, read by the driver itself where it sees the files,
  released;
- `probes`: `SparkProbes`, bounds and NULL-free columns from Arrow or Parquet footers, a
  stored batch's rows by key;
- `merge`: `SparkMerge`, `materialize`, trace merges, big Arrow tables the driver writes;
- `kernel`: `SparkKernel`, the rest of the kernel interface (a load's batch, sizes, Python
  over Arrow, fan-out);
- `state`: `StateStore`, the storage root, the check that the driver sees executors'
  files, a write's rows counted and checked;
- `buckets`: Spark's bucket of a row (Murmur3, seed 42) computed with numpy.
"""

from dsql.runtime.kernel.spark.frames import _order_map
from dsql.runtime.kernel.spark.kernel import SparkKernel
from dsql.runtime.kernel.spark.merge import _sorted_by
from dsql.runtime.kernel.spark.storage import BUCKETS_PER_PARTITION

__all__ = ["BUCKETS_PER_PARTITION", "SparkKernel", "_order_map", "_sorted_by"]
