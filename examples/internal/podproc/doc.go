// Package podproc holds what the examples need to play several pods of a
// service on one machine: each pod a process of the example's own binary,
// frozen for real with SIGSTOP where the scenario needs a long pause, and
// an embedded Redis whose keys age with real time.
package podproc
