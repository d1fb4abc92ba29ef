package main

import "context"

type udpPusher struct{}

func newUDPPusher(s *Server) (*udpPusher, error) { return &udpPusher{}, nil }
func (u *udpPusher) run(ctx context.Context)    {}
func (u *udpPusher) close()                     {}

type beatTracker struct{}

func newBeatTracker() *beatTracker { return &beatTracker{} }
