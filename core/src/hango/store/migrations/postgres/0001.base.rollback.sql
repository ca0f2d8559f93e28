DROP TABLE messages;
DROP TABLE runs;
DROP TABLE sessions;
DROP TABLE agents;
