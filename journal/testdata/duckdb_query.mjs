// duckdb_query.mjs runs one SQL query in an in-memory DuckDB and prints the
// result rows as a JSON array of objects on stdout. The journal tests use it
// as a reader of the Parquet export that shares no code with the writer.
//
// Usage (from the repository root, after `npm ci`):
//
//	node journal/testdata/duckdb_query.mjs "SELECT count(*) AS n FROM 'out/requests.parquet'"
//
// Values are converted with DuckDB's JSON mapping: BIGINT and HUGEINT become
// strings (to keep their precision), DOUBLE becomes a number; cast in SQL
// when a particular shape is wanted.
import { DuckDBInstance } from '@duckdb/node-api';

const sql = process.argv[2];
if (!sql) {
  process.stderr.write('usage: node journal/testdata/duckdb_query.mjs "<sql>"\n');
  process.exit(2);
}

const instance = await DuckDBInstance.create(':memory:');
const conn = await instance.connect();
try {
  const reader = await conn.runAndReadAll(sql);
  process.stdout.write(JSON.stringify(reader.getRowObjectsJson()) + '\n');
} catch (err) {
  process.stderr.write(`duckdb: ${err.message}\n`);
  process.exitCode = 1;
} finally {
  conn.closeSync();
  instance.closeSync();
}
