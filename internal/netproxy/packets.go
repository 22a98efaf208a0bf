package netproxy

import "sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"

// Packet constructors: the generated oneof types are verbose, and a wrong
// pairing of Type and Payload is a silent protocol error.

func DialRsp(random, connectID int64, errMsg string) *client.Packet {
	return &client.Packet{Type: client.PacketType_DIAL_RSP, Payload: &client.Packet_DialResponse{
		DialResponse: &client.DialResponse{Random: random, ConnectID: connectID, Error: errMsg}}}
}

func DialReq(random int64, protocol, address string) *client.Packet {
	return &client.Packet{Type: client.PacketType_DIAL_REQ, Payload: &client.Packet_DialRequest{
		DialRequest: &client.DialRequest{Random: random, Protocol: protocol, Address: address}}}
}

func DialCls(random int64) *client.Packet {
	return &client.Packet{Type: client.PacketType_DIAL_CLS, Payload: &client.Packet_CloseDial{
		CloseDial: &client.CloseDial{Random: random}}}
}

func CloseReq(connectID int64) *client.Packet {
	return &client.Packet{Type: client.PacketType_CLOSE_REQ, Payload: &client.Packet_CloseRequest{
		CloseRequest: &client.CloseRequest{ConnectID: connectID}}}
}

func CloseRsp(connectID int64, errMsg string) *client.Packet {
	return &client.Packet{Type: client.PacketType_CLOSE_RSP, Payload: &client.Packet_CloseResponse{
		CloseResponse: &client.CloseResponse{ConnectID: connectID, Error: errMsg}}}
}

func Data(connectID int64, b []byte) *client.Packet {
	return &client.Packet{Type: client.PacketType_DATA, Payload: &client.Packet_Data{
		Data: &client.Data{ConnectID: connectID, Data: b}}}
}

func Drain() *client.Packet {
	return &client.Packet{Type: client.PacketType_DRAIN, Payload: &client.Packet_Drain{Drain: &client.Drain{}}}
}
