package main

import "net/http"

func (s *Server) httpHandler() http.Handler { return http.NewServeMux() }
