DROP TABLE workspace_blobs;
