DROP TABLE memory_versions;
DROP TABLE memory_entries;
